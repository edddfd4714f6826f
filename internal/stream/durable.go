package stream

import (
	"fmt"
	"strconv"
	"strings"
)

// A consumer whose sources carry an ordering key reads HOOKS through one
// durable per partition besides its own: "<consumer>~p<NN>". '~' is not a
// character of a consumer name ([ValidName]), so no configured consumer
// can own another's partition durable by its spelling.
const partitionSep = "~p"

// PartitionDurable is the name of consumer's durable for partition p.
func PartitionDurable(consumer string, p int) string {
	return fmt.Sprintf("%s%s%02d", consumer, partitionSep, p)
}

// ConsumerOfDurable is the consumer a HOOKS durable belongs to and its
// partition (-1 for the consumer's own, unpartitioned durable). A name
// that no consumer could have written gives "" and -1.
func ConsumerOfDurable(durable string) (consumer string, partition int) {
	i := strings.LastIndex(durable, partitionSep)
	if i < 0 {
		if ValidName(durable) {
			return durable, -1
		}
		return "", -1
	}
	p, err := strconv.Atoi(durable[i+len(partitionSep):])
	if err != nil || p < 0 || !ValidName(durable[:i]) {
		return "", -1
	}
	return durable[:i], p
}
