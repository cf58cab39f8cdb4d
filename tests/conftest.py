import os
import sys

sys.path.insert(0,
                os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

# tests/matrix is a suite of its own, for the installed wheel in a venv per TensorFlow version
# (its conftest refuses the source tree this file puts on sys.path): not part of this suite.
collect_ignore = ["matrix"]
