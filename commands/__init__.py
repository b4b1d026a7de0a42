"""The command line, one module per concern; ``cli.py`` (the ``booktts`` entry point) assembles them.

- :mod:`commands.options`: the options and error contract every command shares (one ``error:``
  line and an exit code per :mod:`core.errors` class);
- :mod:`commands.local`: ``plan``, ``run``, ``export-weights`` (the embedded runner);
- :mod:`commands.distributed`: ``submit``, ``worker``, ``status``, ``resume``, ``cancel``;
- :mod:`commands.ops`: ``watch``, ``backlog``, ``beat``;
- :mod:`commands.engine`: ``export-onnx``, ``calibrate``, ``build-engine``.

Commands parse and print; the work is done by :mod:`jobs`, :mod:`engines` and :mod:`workers`.
"""
