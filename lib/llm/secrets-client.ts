/**
 * The two names of the Secrets Manager SDK the API key source uses, behind a dynamic import of this module
 * (lib/llm/api-key.ts): a local run never loads the SDK, and a bundle keeps only these two, where a dynamic
 * import of the SDK's package itself would keep every command it exports.
 */
export { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
