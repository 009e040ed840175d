from opgate.cli import main

main()
