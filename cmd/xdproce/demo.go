package main

import (
	"context"
	"errors"
	"io"
)

func runDemo(_ context.Context, _ []string, _ io.Writer) error {
	return errors.New("not yet wired")
}
