from nanoagent.cli.app import main

main()
