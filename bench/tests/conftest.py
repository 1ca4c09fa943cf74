# Makes `import harness` work when pytest runs from the repository root (make test-python).
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
