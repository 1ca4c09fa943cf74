"""Makes the in-tree package importable and points it at the in-tree libnezha build."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PKG_ROOT))
sys.path.insert(0, PKG_ROOT)
sys.path.insert(0, HERE)
os.environ.setdefault("NEZHA_LIBRARY", os.path.join(REPO, "build", "runtime", "libnezha.so"))
