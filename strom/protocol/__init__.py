"""The Kafka wire protocol: bytes in, objects out (no sockets, threads or clocks).

* ``primitives`` -- primitive wire types (``Reader`` / ``Writer`` and fast ``read_*`` / ``write_*`` functions);
* ``messages`` -- generated request/response/data classes, ``REQUESTS`` / ``RESPONSES`` registries;
* ``api_keys`` -- the ``ApiKey`` enum (generated);
* ``headers`` -- request/response headers and header-version rules;
* ``connection`` -- ``KafkaConnection``: framing, correlation ids, in-flight FIFO (sans-I/O);
* ``base`` -- base classes and ``FieldInfo`` schema of the generated classes.
"""
