package engine

// WithDefaults is o with every option it leaves unset given the value
// [New] gives it, or the error New answers for o. `hookbridge config
// check` prints a consumer's settings through it, so that what it prints
// is what serve runs with.
func (o Options) WithDefaults() (Options, error) {
	err := o.setDefaults()
	return o, err
}
