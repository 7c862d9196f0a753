"""Only the optional C accelerator lives here (everything else is in pyproject.toml): the consumer's columnar
decode, ``strom/record/_fastdecode.c``. Where no C compiler is found the install goes on without it, and the numpy
path of ``strom.consumer.internals.arrow_decoder`` decodes every batch."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("strom.record._fastdecode", sources=["strom/record/_fastdecode.c"], optional=True)])
