"""``python -m ofindex …`` runs the ``ofindex`` command."""

import sys

from .cli import main

sys.exit(main())
