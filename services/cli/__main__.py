from services.cli.main import main

main()
