"""``python tools/kafka_broker.py`` (what ``make kafka`` runs): a single-node Kafka broker on
loopback until Ctrl-C, and the suite's broker (``shared_bootstrap``).

The broker starter itself lives in the package, ``src/lockgate/dev/_broker.py``, so that
``lockgate dev`` has it once lockgate is installed. This file loads that module by its path
rather than importing ``lockgate``: the module uses the standard library only, so ``make kafka``
runs with any Python 3.11, before lockgate or its dependencies are installed. Every public name
of the module is a name of this one (``KafkaBroker``, ``shared_bootstrap``, ``missing_tools``,
``BOOTSTRAP_ENV``, ...).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "src" / "lockgate" / "dev" / "_broker.py"
_NAME = "lockgate_dev_broker"

if _NAME in sys.modules:
    _module = sys.modules[_NAME]
else:
    _spec = importlib.util.spec_from_file_location(_NAME, _PATH)
    assert _spec is not None
    assert _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module  # before running it: dataclasses and the like look it up
    _spec.loader.exec_module(_module)

globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__")})

if __name__ == "__main__":
    sys.exit(_module.main())
