"""The demo program (`make demo`, or `python -m demo.recommender` from the repository root):
tf_opt_ops as a user runs it, outside the library and its wheel."""
