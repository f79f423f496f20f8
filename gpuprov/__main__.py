"""``python -m gpuprov`` runs the CLI."""

import sys

from gpuprov.cli.__main__ import main

sys.exit(main())
