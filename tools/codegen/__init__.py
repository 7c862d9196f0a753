"""The protocol code generator (not shipped): ``python -m tools.codegen [--check] [--spec-dir DIR]``.

Reads Kafka's message-definition JSON (``<spec-dir>/messages/*.json``, ``<spec-dir>/records/*.json``,
``//`` comments stripped) and writes committed plain-Python modules:

* ``strom/protocol/messages/<api>.py`` -- one module per API (``produce.py`` holds ``ProduceRequest`` and
  ``ProduceResponse``), ``headers_gen.py`` for the two header schemas, ``consumer_protocol.py``,
  ``group_coordinator_records.py`` and ``transaction_log.py`` for the ``records/`` data types;
* ``strom/protocol/messages/__init__.py`` -- ``REQUESTS`` / ``RESPONSES`` (by api key), ``DATA_TYPES``;
* ``strom/protocol/api_keys.py`` -- the ``ApiKey`` enum;
* ``strom/common/error_codes.py`` -- via ``tools.codegen.errors.generate``.

Modules: ``spec`` (JSON -> model, naming, struct disambiguation), ``emit`` (model -> straight-line
per-version codec source), ``__main__`` (file layout, registry, ``--check``), ``bench`` (codec timings).
"""
