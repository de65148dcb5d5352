from lockgate.demo._demo import main

raise SystemExit(main())
