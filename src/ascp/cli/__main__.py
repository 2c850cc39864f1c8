from ascp.cli import main

main()
