from opgate.cli import console_main

console_main()
