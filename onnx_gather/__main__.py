import sys

from onnx_gather.app.entry import main

sys.exit(main())
