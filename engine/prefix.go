package engine

// FlushCache drops every cached prefix that no running request uses.
func (e *Engine) FlushCache() error {
	if e.radix == nil {
		return nil
	}
	errc := make(chan error, 1)
	select {
	case e.control <- func() {
		err := e.radix.Reset()
		e.publishKV() // Stats shows the freed pages once FlushCache returns
		errc <- err
	}:
	case <-e.stop:
		return ErrClosed
	}
	return <-errc
}
