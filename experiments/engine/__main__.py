import sys

from experiments.engine import cli

sys.exit(cli.main())
