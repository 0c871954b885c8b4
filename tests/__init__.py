"""The test suite: one directory per ofindex package it tests, tests/kit/ shared by all."""
