from streamfold.cli import main

raise SystemExit(main())
