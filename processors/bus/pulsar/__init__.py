"""The Pulsar backend (pulsar-client): the bus, its log topics, listener inbox, core log and broker metrics.

Nothing is imported here, so ``ragbus.bus.connect`` loads pulsar-client only for a
``pulsar://`` URL.
"""
