"""Training texts composed from the labelled set: everyday chats, long chats, benign sentences, buried requests."""
