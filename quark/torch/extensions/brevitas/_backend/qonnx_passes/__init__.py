"""The package's own qonnx code: what FINN's front end and the QONNX verification run on, fast on
deep graphs without modifying qonnx or FINN.

- :mod:`.wrapper`: :class:`~.wrapper.FastModelWrapper`, a qonnx ``ModelWrapper`` whose ``transform``
  runs the equivalents below in place of qonnx's passes (its ``EQUIVALENTS`` table);
- :mod:`.indexed`: :class:`~.indexed.IndexedModel`, the graph with dict lookups, for one pass;
- :mod:`.tidy`, :mod:`.names`, :mod:`.shapes`, :mod:`.annotations`, :mod:`.constants`: qonnx 1.0.0's
  whole-graph passes in linear time (the ones qonnx repeats node by node, with a cleanup after each,
  in steps kept up to date), each giving qonnx's graph byte for byte;
- :mod:`.execution`: qonnx's ``execute_onnx`` with dict lookups and kept ONNX Runtime sessions.

What upstream qonnx could take from it is written up in ``docs/finn.md`` ("qonnx and FINN upstream").
Importing this package imports qonnx (the export extra).
"""
