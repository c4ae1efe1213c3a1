/**
 * Builds DynamoDB expressions with every attribute name and value as a placeholder, so reserved words
 * (status, step, version ...) never need thought and values never need escaping.
 */
export class Expression {
  readonly names: Record<string, string> = {};
  readonly values: Record<string, unknown> = {};
  private counter = 0;

  name(attribute: string): string {
    const placeholder = `#${attribute.replace(/[^A-Za-z0-9_]/g, '_')}`;
    this.names[placeholder] = attribute;
    return placeholder;
  }

  value(value: unknown): string {
    const placeholder = `:v${this.counter++}`;
    this.values[placeholder] = value;
    return placeholder;
  }

  /** `SET a = :v0, b = :v1 REMOVE c, d`; attributes set to undefined are removed. */
  update(set: Record<string, unknown>, remove: string[] = []): string {
    const sets: string[] = [];
    const removes = new Set(remove);
    for (const [attribute, value] of Object.entries(set)) {
      if (value === undefined) removes.add(attribute);
      else sets.push(`${this.name(attribute)} = ${this.value(value)}`);
    }
    const parts: string[] = [];
    if (sets.length) parts.push(`SET ${sets.join(', ')}`);
    if (removes.size) parts.push(`REMOVE ${[...removes].map((a) => this.name(a)).join(', ')}`);
    return parts.join(' ');
  }

  /** The names and values to pass with the expressions; omitted when empty (DynamoDB rejects empty maps). */
  params(): { ExpressionAttributeNames?: Record<string, string>; ExpressionAttributeValues?: Record<string, unknown> } {
    return {
      ...(Object.keys(this.names).length ? { ExpressionAttributeNames: this.names } : {}),
      ...(Object.keys(this.values).length ? { ExpressionAttributeValues: this.values } : {}),
    };
  }
}
