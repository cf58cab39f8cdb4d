"""The routers: `CompositeOptimizer` and `MultiOptimizer` apply different optimizers to
different variables, on every Keras API. One module per concern:

- `rules`: which variables a block (layer, variable, callable, pattern, list) claims;
- `table`: the routing table: claims, building the sub-optimizers, grouping pairs;
- `core`: the `Flavor` interface, `OptimizerBlocks`, and the behaviour both router kinds
  share, over a router's plain state (`RouterState`);
- `keras`, `tf_keras`, `legacy`: one adapter per Keras optimizer API (`tf_keras_common` is
  what the two tf_keras APIs share).

The public classes are exported by the flavor modules (`tf_opt_ops.keras.MultiOptimizer`,
...). Why they are built this way: docs/design.md, "Routers".
"""
