import sys

from workbench.server.cli import main

sys.exit(main())
