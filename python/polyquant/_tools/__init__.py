"""What the ``polyquant`` command runs, kept out of the families' packages: ``cli`` (the argument
parser and the ``info`` command), ``runner`` (``polyquant run``: a model in ONNX Runtime with
polyquant's custom ops, against its reference) and ``bench`` (``polyquant bench``: one module of
cases per family and a driver)."""
