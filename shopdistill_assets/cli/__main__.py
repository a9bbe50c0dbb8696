"""`python -m shopdistill_assets.cli`: the `shopdistill` command."""

import sys

from shopdistill_assets.cli.commands import main

sys.exit(main())
