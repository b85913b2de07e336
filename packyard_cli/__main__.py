"""``python -m packyard_cli``: the same as the ``packyard`` console script."""

import sys

from packyard_cli.main import main

sys.exit(main())
