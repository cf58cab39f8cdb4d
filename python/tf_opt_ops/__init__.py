"""tf_opt_ops: fused sparse lazy Adam and Clippy Adagrad ops for TensorFlow.

`tf_opt_ops.ops` holds the raw op wrappers. Importing the package loads the op
library, so a missing or mismatched build fails here with an ImportError that
says what to do.
"""

from tf_opt_ops import ops
from tf_opt_ops._loader import load_library

load_library()

from tf_opt_ops._version import __version__
