__version__ = "0.1.0"  # keep in step with version.bzl (tests check it)
