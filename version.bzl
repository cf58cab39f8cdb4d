"""The package version, for the wheel's name (python/tf_opt_ops/_version.py must agree)."""

VERSION = "0.1.0"
