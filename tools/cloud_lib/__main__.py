import sys

from cloud_lib import cli

sys.exit(cli.main())
