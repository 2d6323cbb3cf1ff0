"""The sandbox runners' logic without running code: the Modal runner over a scripted remote, the run places."""
