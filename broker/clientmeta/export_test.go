package clientmeta

// CheckClientID is the check of a client_id every fetch starts with
// (checkClientID), under f's AllowLoopbackHTTP; nil or an *Error.
func (f *Fetcher) CheckClientID(clientID string) error {
	if err := checkClientID(clientID, f.opts.AllowLoopbackHTTP); err != nil {
		return err
	}
	return nil
}
