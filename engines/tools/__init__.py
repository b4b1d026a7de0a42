"""Offline tools over a voice's model, apart from the runtime backends beside them in :mod:`engines`.

``export``         the model as two ONNX stages (``cli.py export-onnx``), cached per voice; the staged onnx
                   and TensorRT engines build from them on first use.
``quantize``       INT8 by calibration: a Q/DQ stage B (``cli.py calibrate``), on phoneme ids its caller gives
                   (:class:`quantize.CalibrationSet`; :mod:`jobs.calibration` makes them from the shipped corpus).
``weights``        the model's weights as ``.safetensors`` (``cli.py export-weights``), read by the torch engine.
``audio_quality``  MCD and SNR, the one definition of the quality gates (tests, ``bench/``).

Like every module of :mod:`engines`, they see no text: nothing here imports :mod:`jobs`
(``tests/test_layers.py``).
"""
