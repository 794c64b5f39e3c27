"""The Kafka backend (aiokafka): the bus, its consumer groups, topic layouts and group status.

Nothing is imported here, so ``ragbus.bus.kafka.offsets`` loads without aiokafka and
``ragbus.bus.connect`` loads the client only for a ``kafka://`` URL.
"""
