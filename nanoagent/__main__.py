from nanoagent.cli.entry import main

main()
