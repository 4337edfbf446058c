"""``python -m quark.torch.extensions.brevitas``: the ``quark-brevitas`` command line."""

from quark.torch.extensions.brevitas.cli import main

raise SystemExit(main())
