"""What the dashboard shows, read from the project's files (`views`), and the reward model's views of
replies a person gives it (`probe`)."""
