import sys

from pkps_core.cli import main

sys.exit(main())
