"""Sample networks and the bundled handwritten-digits data set."""
