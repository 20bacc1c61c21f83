import sys

from icegres.cli import main

sys.exit(main())
