"""Only the optional C accelerators live here (everything else is in pyproject.toml): the consumer's columnar
decode, ``strom/record/_fastdecode.c``, and the producer's per-record encode, ``strom/record/_fastencode.c``. Where
no C compiler is found the install goes on without them: the numpy path of
``strom.consumer.internals.arrow_decoder`` decodes every batch, and ``MemoryRecordsBuilder.try_append`` encodes
every record in Python."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("strom.record._fastdecode", sources=["strom/record/_fastdecode.c"], optional=True),
    Extension("strom.record._fastencode", sources=["strom/record/_fastencode.c"], optional=True),
])
