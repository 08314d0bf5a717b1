from ringmaster.cli import main

raise SystemExit(main())
