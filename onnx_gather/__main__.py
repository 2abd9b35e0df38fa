import sys

from onnx_gather.cli import main

sys.exit(main())
