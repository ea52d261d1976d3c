import sys

from twill.cli import main

sys.exit(main())
