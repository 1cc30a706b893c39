from hominem_pipeline.cli import main

main()
