package tokenizer

type chatTemplate struct{}

func compileChatTemplate(s string) (*chatTemplate, error) { return &chatTemplate{}, nil }
