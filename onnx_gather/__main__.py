import sys

from onnx_gather.app.cli import main

sys.exit(main())
