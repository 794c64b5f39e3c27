"""Support for tests and local experiments: real test brokers on loopback."""
