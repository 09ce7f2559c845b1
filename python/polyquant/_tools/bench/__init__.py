"""`polyquant bench`: one module of cases per family (``qonnx``, ``qkeras``, ``onnx``, ``quark``,
``aimet``), shared helpers (``common``) and the driver that runs and reports them (``driver``)."""
